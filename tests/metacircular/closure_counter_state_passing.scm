(param a 0.5)
;; a "counter" without mutation: each step returns the value and the next counter
(define (make-counter n) (lambda () (cons n (make-counter (+ n a)))))
(let loop ((c (make-counter 0.0)) (i 0) (acc 0.0))
  (if (= i 10)
      acc
      (let ((step (c)))
        (loop (cdr step) (+ i 1) (+ acc (car step))))))
