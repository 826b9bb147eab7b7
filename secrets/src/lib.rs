//! car-secrets (being written).
