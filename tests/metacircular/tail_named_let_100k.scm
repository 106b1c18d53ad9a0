(param a 1e-5)
(let loop ((i 0) (acc 0.0))
  (if (= i 100000) acc (loop (+ i 1) (+ acc a))))
