"""The search and its guidance: the planner, the advice tables, the cheap bounds and the explanation of two runs."""
