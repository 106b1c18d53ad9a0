; Conformance programs: numbers. Exact integers stay exact, inexact contaminates, R7RS signs for
; integer division, round to even. No exact division that leaves a remainder (NDVM has no rationals).

;;; num-add-exact
(+ 1 2 3 4)

;;; num-add-zero-args
(+)

;;; num-mul-zero-args
(*)

;;; num-add-mixed-inexact
(+ 1 2.5)

;;; num-sub-unary
(- 5)

;;; num-sub-variadic
(- 10 1 2 3)

;;; num-mul-exact
(* 2 3 7)

;;; num-mul-mixed
(* 2 1.5)

;;; num-div-inexact
(/ 7.0 2)

;;; num-div-unary-inexact
(/ 4.0)

;;; num-div-variadic-inexact
(/ 100.0 2 5)

;;; num-div-exact-divides
(/ 12 4)

;;; num-exact-large-product
(* 99999 99999)

;;; num-negative-literal
(+ -3 -4.5)

;;; num-float-literals
(list 1e3 .5 -0.25 2.0e-3 1.5e2)

;;; num-quotient-signs
(list (quotient 17 5) (quotient -17 5) (quotient 17 -5) (quotient -17 -5))

;;; num-remainder-signs
(list (remainder 17 5) (remainder -17 5) (remainder 17 -5) (remainder -17 -5))

;;; num-modulo-signs
(list (modulo 17 5) (modulo -17 5) (modulo 17 -5) (modulo -17 -5))

;;; num-modulo-exact-zero-remainder
(list (modulo 10 5) (modulo -10 5) (remainder -10 5))

;;; num-quotient-inexact
(list (quotient 17.0 5) (remainder 17.0 5) (modulo -17.0 5))

;;; num-round-to-even
(list (round 0.5) (round 1.5) (round 2.5) (round -0.5) (round -1.5) (round -2.5) (round 2.6) (round -2.4))

;;; num-round-exact
(round 7)

;;; num-floor-ceiling-truncate
(list (floor 2.7) (ceiling 2.2) (truncate 2.7) (floor -2.7) (ceiling -2.2) (truncate -2.7))

;;; num-floor-exact
(list (floor 5) (ceiling -5) (truncate 3))

;;; num-abs
(list (abs -5) (abs 5) (abs -2.5) (abs 0))

;;; num-min-max-exact
(list (min 3 1 2) (max 3 1 2))

;;; num-min-max-inexact-contagion
(list (max 1 2.0) (min 1 2.0))

;;; num-min-max-float
(list (min 1.5 -2.5) (max 1.5 -2.5))

;;; num-expt-exact
(list (expt 2 10) (expt 3 0) (expt -2 3))

;;; num-expt-inexact
(list (expt 2.0 0.5) (expt 2.5 2) (expt 4.0 -1))

;;; num-exp-log
(list (exp 1.0) (log 10.0) (exp (log 3.5)))

;;; num-sqrt-inexact
(list (sqrt 2.0) (sqrt 6.25) (sqrt 2))

;;; num-trig
(list (sin 0.5) (cos 0.5) (tan 0.5))

;;; num-inverse-trig
(list (asin 0.5) (acos 0.5) (atan 0.5))

;;; num-atan-two-args
(list (atan 1.0 1.0) (atan 1.0 -1.0) (atan -1.0 -1.0) (atan -1.0 1.0))

;;; num-square
(list (square 5) (square -1.5))

;;; num-exact-to-inexact
(list (exact->inexact 7) (exact->inexact 2.5))

;;; num-equal-mixed
(list (= 3 3.0) (= 3 3) (= 1.5 1.5) (= 1 2))

;;; num-chained-less
(list (< 1 2 3) (< 1 3 2) (< 1 1 2))

;;; num-chained-less-equal
(list (<= 1 1 2) (<= 1 2 1.5))

;;; num-chained-greater
(list (> 3 2 1) (> 3 1 2) (>= 3 3 2) (>= 3 4 2))

;;; num-chained-equal
(list (= 2 2 2.0) (= 2 2 3))

;;; num-predicates-sign
(list (zero? 0) (zero? 0.0) (zero? 1e-300) (positive? 2) (positive? -2.5) (negative? -1) (negative? 0))

;;; num-even-odd
(list (even? 0) (even? 7) (odd? 7) (odd? -3) (even? -4))

;;; num-exactness-preserved-by-loop
(let loop ((i 0) (acc 1)) (if (= i 10) acc (loop (+ i 1) (* acc 2))))

;;; num-inexact-sum
(let loop ((i 0) (acc 0.0)) (if (= i 10) acc (loop (+ i 1) (+ acc 0.1))))

;;; num-mixed-exact-inexact-list
(list (+ 1 1) (+ 1 1.0) (- 3 3) (- 3.0 3) (* 4 0.25))

;;; num-large-float
(* 1e200 1e100)

;;; num-small-float
(/ 1e-200 1e100)

;;; num-mean-variance
(define data '(2.0 4.0 4.0 4.0 5.0 5.0 7.0 9.0))
(define n (length data))
(define mean (/ (apply + data) n))
(define var (/ (apply + (map (lambda (x) (square (- x mean))) data)) n))
(list mean var (sqrt var))

;;; num-tanh-values
(list (tanh 0.5) (tanh -2.0))

;;; num-log-exp-composition
(define (logistic x) (/ 1.0 (+ 1.0 (exp (- x)))))
(list (logistic 0.0) (logistic 2.0) (logistic -3.0))

;;; num-softplus-by-hand
(define (softplus x) (log (+ 1.0 (exp x))))
(softplus 0.3)

;;; num-compound-interest
(define (grow p r years) (if (= years 0) p (grow (* p (+ 1.0 r)) r (- years 1))))
(grow 1000.0 0.05 10)

;;; num-newton-cube-root
(define (cube-root x)
  (let loop ((g 1.0) (k 0))
    (if (= k 50) g (loop (- g (/ (- (* g g g) x) (* 3.0 g g))) (+ k 1)))))
(cube-root 27.0)

;;; num-euler-ode
(define (euler f y0 t0 t1 n)
  (let ((h (/ (- t1 t0) n)))
    (let loop ((i 0) (t t0) (y y0))
      (if (= i n) y (loop (+ i 1) (+ t h) (+ y (* h (f t y))))))))
(euler (lambda (t y) (- y)) 1.0 0.0 1.0 100)

;;; num-logistic-map
(let loop ((i 0) (x 0.2))
  (if (= i 20) x (loop (+ i 1) (* 3.7 x (- 1.0 x)))))

;;; num-polynomial-roots-quadratic
(define (roots a b c)
  (let ((d (- (* b b) (* 4.0 a c))))
    (list (/ (+ (- b) (sqrt d)) (* 2.0 a)) (/ (- (- b) (sqrt d)) (* 2.0 a)))))
(roots 1.0 -3.0 2.0)

;;; num-digits-sum
(define (digit-sum n) (if (= n 0) 0 (+ (remainder n 10) (digit-sum (quotient n 10)))))
(digit-sum 987654321)

;;; num-exact-integer-sqrt-loop
(define (isqrt n) (let loop ((k 0)) (if (> (* (+ k 1) (+ k 1)) n) k (loop (+ k 1)))))
(isqrt 1000)

;;; num-comparisons-mixed-inexact
(list (< 1 1.5 2) (> 2.5 2 1.5) (<= 2 2.0 3) (>= 1.0 1 0.5))

;;; num-zero-exact-minus
(list (- 0 5) (- 0.0 5))

;;; num-abs-of-exact-negative-product
(abs (* -3 7))

;;; num-floor-of-division
(floor (/ 7.0 2))

;;; num-truncate-negative-half
(list (truncate -0.5) (round -0.5))

;;; num-even-odd-large
(list (even? 1000000) (odd? 999999))

;;; num-max-of-many
(max 1 5 3 9 2)

;;; num-expt-zero-zero
(expt 0 0)

;;; num-exp-negative
(exp -2.0)

;;; num-sum-of-squares-exact
(apply + (map square '(1 2 3 4 5)))

;;; num-inexact-equality-of-computed
(= (* 0.5 4) 2)

;;; num-number-predicate-on-computed
(number? (sqrt 2.0))

;;; num-exact-add-sub-chain
(- (+ 100 200 300) (* 2 50) 75)

;;; num-float-precision-sum
(+ 0.1 0.2)

;;; num-integer-arithmetic-identities
(list (* 12345 6789) (+ 1000000 -999999) (quotient 1000000007 1000))

;;; num-max-inexact-last
(max 1 2 3.0)

;;; num-apply-plus-iota-1000
(define (iota n) (let loop ((i (- n 1)) (acc '())) (if (< i 0) acc (loop (- i 1) (cons i acc)))))
(apply + (iota 1000))

;;; num-exact-integer-past-2-pow-53
(+ 9007199254740992 1)

;;; num-exact-product-past-2-pow-53
(* 94906267 94906267)

;;; num-quotient-exact-neg-big
(quotient -123456789012 1000)

;;; num-modulo-exact-neg-big
(modulo -123456789012 1000)

;;; num-expt-int-negative-base-even
(expt -2 4)

;;; num-expt-float-fractional
(expt 8.0 (/ 1.0 3))

;;; num-exact-plus-float-zero
(+ 0 0.0)

;;; num-number-formats
(list -0.5 +0.5 1. -1e-3)
