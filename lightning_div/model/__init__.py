"""The model side: the shipped base model, and how lightning-div reaches, runs and scores a dialogue model."""
