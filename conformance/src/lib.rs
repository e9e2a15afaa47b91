//! fleet-conformance: black-box specs any fleet implementation can be run against.
