"""The layers of the stack an experiment can change, ordered by what a change costs."""
