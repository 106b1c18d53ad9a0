;; guile: skip
;; inputs: {"ys": [[0.1, 0.2], [0.3, 0.1], [0.2, 0.4], [0.5, 0.3], [0.4, 0.6]]}
(param q 0.3 positive)
(param r 0.3 positive)
(define I (eye 2))
(let loop ((t 0) (x (zeros 2)) (P I) (nll 0.0))
  (if (= t (rows ys)) nll
      (let* ((Pp (+ P (* q I))) (S (+ Pp (* r I))) (e (- (ref ys t) x)) (Si (inv S)) (K (matmul Pp Si)))
        (loop (+ t 1) (+ x (matvec K e)) (matmul (- I K) Pp) (+ nll (logdet S) (dot e (matvec Si e)))))))
