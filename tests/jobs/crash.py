"""Print a little, then crash with a recognisable error."""

print("working on it", flush=True)
raise RuntimeError("boom: the model diverged at step 3")
