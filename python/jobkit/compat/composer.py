"""Placeholder: written next."""
