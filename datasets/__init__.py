"""datasets package of NDVM discovery."""
