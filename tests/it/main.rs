//! Integration tests of iterstore through its public API (one test binary).

mod api_errors;
mod ssp_props;
mod util;
