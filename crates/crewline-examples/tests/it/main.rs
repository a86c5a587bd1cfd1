//! The integration tests as one binary (one link, one copy of the dependencies' code
//! instead of one per file); a test that needs a process of its own stays a file of
//! its own in `tests/`.

mod background_crash;
mod bank_crash;
mod fallback_flags;
mod replicas;
mod shared_breakers;
mod slow_booking;
mod voice_agent_idle;
mod voice_agent_long_call;
