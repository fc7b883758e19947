//! The example client (`skill-runner example-client`): a separate front end that knows the
//! service only through its public HTTP API, as a real front end would.

pub mod form;
