(round 2.5) (floor -1.5) (ceiling 1.2) (truncate -1.7)
