//! Integration tests of the performance model and optimizer (one test binary): the DP
//! search against the brute-force oracle, the paper's qualitative findings (section 6) from
//! the stated constants of `builtin::example_profile`, Table 1's rankings from the paper's
//! setup (`perf/paper/`), the search's speed, and the plan file.

mod brute_force;
mod findings;
mod paper;
mod plan_file;
mod speed;
