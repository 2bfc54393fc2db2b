//! Tests of whole clusters of [`super::Net`]s on 127.0.0.1.
