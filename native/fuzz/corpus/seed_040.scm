(size (vec 1 2)) (rows (eye 3)) (cols (ones 2 4)) (ref (vec 1 2) 5)
