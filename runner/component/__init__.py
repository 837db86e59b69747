"""A standard-library-only SDK for writing FLOW Run/1 components."""
