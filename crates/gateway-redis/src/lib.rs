#![doc = include_str!("../README.md")]

pub mod agent_rate;
mod error;
pub mod leadership;
mod link;
pub mod members;
pub mod rate;

pub use agent_rate::{LimiterConfig, RedisRateLimiter};
pub use error::Error;
pub use leadership::{
    ClusterStatus, LeaderStatus, LeadershipConfig, LeadershipPorts, LeaseTimings, RedisLeadership, RedisReachability,
    Role, Term,
};
pub use members::{Member, RedisMembers};
pub use rate::{RateConfig, RedisDispatchRate, RedisEndpointRate};
