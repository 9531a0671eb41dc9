"""The cost model: step cost per batch and K, acceptance profiles, schedules, baselines, payback."""
