//! Text from the model, shown to a person: defined once in [`proto::visible`], where clients
//! (boxctl showing staged paths and diffs) find it too.

pub use proto::visible::{visible, Visible};
