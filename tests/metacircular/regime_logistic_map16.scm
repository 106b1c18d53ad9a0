(param r 3.2 (between 0 4))
(param x0 0.3 (between 0 1))
(let loop ((n 0) (x x0))
  (if (= n 16) x (loop (+ n 1) (* r x (- 1 x)))))
