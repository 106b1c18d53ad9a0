"""flows package of NDVM discovery."""
