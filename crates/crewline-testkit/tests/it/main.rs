//! The integration tests as one binary (one link, one copy of the dependencies' code
//! instead of one per file); a test that needs a process of its own stays a file of
//! its own in `tests/`.

mod conversation;
mod idle;
mod in_process;
mod load_mock_faults;
mod long_call;
mod mock_faults;
mod mock_llm;
mod platform_bounds;
mod reference_frames;
mod slow_tools;
