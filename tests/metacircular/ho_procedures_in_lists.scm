(param a 0.7)
(define ops (list (cons 'double (lambda (x) (* 2 x))) (cons 'shift (lambda (x) (+ x a))) (cons 'exp exp)))
(define (run-ops names x) (if (null? names) x (run-ops (cdr names) ((cdr (assq (car names) ops)) x))))
(run-ops '(double shift exp shift) a)
