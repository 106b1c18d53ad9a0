(param a 0.1)
(let sum ((i 1) (acc 0.0))
  (if (> i 50) acc (sum (+ i 1) (+ acc (* a i)))))
