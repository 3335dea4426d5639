"""Dialogue data: readers for common formats and the DialogueDataModule."""
