(param a 0.5)
(define (build n) (if (= n 0) '() (cons (* a n) (build (- n 1)))))
(define (sum xs) (if (null? xs) 0 (+ (car xs) (sum (cdr xs)))))
(sum (build 30))
