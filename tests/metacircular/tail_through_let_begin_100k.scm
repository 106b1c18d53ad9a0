(param a 0.5)
(define (go i x)
  (let ((next (- i 1)))
    (begin
      (if (= i 0)
          x
          (let* ((y (* x a)) (z (+ y 0.3)))
            (go next z))))))
(go 100000 1.0)
