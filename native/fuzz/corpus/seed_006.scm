(loop ((k 0) (acc 1.0)) (if (> k 5) acc (recur (+ k 1) (* acc 1.5))))
