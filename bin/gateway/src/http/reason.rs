//! The refusal reasons are the HTTP API contract's: gateway-api's [`Reason`], named here as well for the modules
//! that name it from `http`.

pub use gateway_api::Reason;
