//! The platform client now lives in [`crewline_testkit::platform`]; this re-export keeps the
//! chat loop's and the demo's `crate::platform` imports working until they import it directly.

pub use crewline_testkit::platform::*;
