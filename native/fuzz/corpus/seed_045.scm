(map + (vec 1 2) '(1))
