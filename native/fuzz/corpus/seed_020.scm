(list-tail (list 1 2 3 4) 2)
