"""storage package of NDVM discovery."""
