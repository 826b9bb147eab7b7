//! car-builtin-tools (being written).
