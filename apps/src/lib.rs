//! The applications bundled with iterstore (in progress).
