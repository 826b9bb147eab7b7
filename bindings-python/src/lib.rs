//! Placeholder: the python binding is being written.
