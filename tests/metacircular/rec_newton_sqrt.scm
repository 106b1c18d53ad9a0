(param c 2.0 positive)
(define (newton x n) (if (= n 0) x (newton (* 0.5 (+ x (/ c x))) (- n 1))))
(newton 1.0 8)
