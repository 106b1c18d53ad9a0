(param a 0.01)
(define (fib n) (if (< n 2) n (+ (fib (- n 1)) (fib (- n 2)))))
(* a (fib 15))
