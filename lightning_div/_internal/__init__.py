"""Private plumbing the parts share: atomic file io, the distributed layer, Lightning's loop state, text
tokenisers, and logging to trackers. Not public API: names here may change in any release."""
