(param a 1.01)
(do ((i 0 (+ i 1))
     (x 1.0 (* x a)))
    ((= i 20) x))
