//! Placeholder: the uniffi binding is being written.
