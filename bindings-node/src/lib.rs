//! Placeholder: the node binding is being written.
