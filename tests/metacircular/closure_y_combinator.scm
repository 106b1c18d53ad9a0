(param a 0.5)
(define Y
  (lambda (f)
    ((lambda (x) (f (lambda (v) ((x x) v))))
     (lambda (x) (f (lambda (v) ((x x) v)))))))
(define fact (Y (lambda (self) (lambda (n) (if (= n 0) 1 (* n (self (- n 1))))))))
(* a (fact 6))
