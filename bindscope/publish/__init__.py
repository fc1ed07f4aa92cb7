"""Checking and sharing finished datasets: verify, the Hub release, preview grids."""
