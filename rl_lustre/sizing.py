"""Placeholder replaced by the sizing helper."""
