(param a 0.001)
(define (hanoi n) (if (= n 0) 0 (+ 1 (* 2 (hanoi (- n 1))))))
(* a (hanoi 10))
