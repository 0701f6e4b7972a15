//! Where the operator reads what to do: the runbook's anchors, named once in
//! [`proto::runbook`], where the end-to-end suite finds them too. Every log line and every
//! `doctor` line that sends the operator to the runbook uses one of these.

pub use proto::runbook::*;
