(param a 0.5)
(define (gcd-rec x y) (if (= y 0) x (gcd-rec y (remainder x y))))
(* a (gcd-rec 1071 462))
