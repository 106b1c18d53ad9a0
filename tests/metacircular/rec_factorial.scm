(param a 0.5)
(define (fact n) (if (= n 0) 1 (* n (fact (- n 1)))))
(* a (fact 12))
