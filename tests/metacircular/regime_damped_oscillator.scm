;; A damped oscillator x'' = -k x - c x', explicit Euler, 200 steps of dt.
(param k 2.0 positive)
(param c 0.3 positive)
(define dt 0.05)
(let loop ((i 0) (x 1.0) (v 0.0))
  (if (= i 200)
      x
      (loop (+ i 1) (+ x (* dt v)) (+ v (* dt (- (* -1 k x) (* c v)))))))
