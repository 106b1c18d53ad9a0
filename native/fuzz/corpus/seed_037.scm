(car '()) (vector-ref v 0)
