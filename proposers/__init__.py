"""proposers package of NDVM discovery."""
