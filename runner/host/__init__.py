"""Async (anyio) host side: drives a HostSession against a running component."""
