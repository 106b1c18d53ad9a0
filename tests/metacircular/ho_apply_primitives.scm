(param a 1.5)
(+ (apply max (list 1 a 0.5)) (apply * a '(2 3)) (apply - (list 10 a)) (apply list-ref (list '(4 5 6) 1)))
