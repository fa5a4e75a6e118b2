#![doc = include_str!("../README.md")]

mod ci;
mod heavy;
pub mod json_text;
pub mod postgres;
mod receiver;
pub mod redis;
mod sample;

pub use ci::{CI_ENV, is_ci, running_in_ci};
pub use heavy::{HEAVY_LOCK_FILE, HeavyTurn, heavy_test_turn};
pub use receiver::{Receiver, Reply, Request, TimedOut};
pub use sample::{Sample, cpu_time_of, env_size, millis, process_cpu_time, rate};
