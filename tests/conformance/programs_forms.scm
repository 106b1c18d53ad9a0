; Conformance programs: special forms. Each program starts with a line ";;; NAME" and runs up to the next
; such line. The value of a program is its last top-level expression (expected values: Guile, see
; scripts/gen_conformance_fixtures.py).

;;; define-constant
(define x 41)
(+ x 1)

;;; define-function
(define (double n) (* 2 n))
(double 21)

;;; define-lambda-form
(define triple (lambda (n) (* 3 n)))
(triple 14)

;;; define-forward-reference
(define (f n) (g (+ n 1)))
(define (g n) (* n 10))
(f 4)

;;; define-redefinition-at-top-level
(define x 1)
(define x (+ x 10))
x

;;; define-internal
(define (hyp a b)
  (define (sq v) (* v v))
  (define s (+ (sq a) (sq b)))
  (sqrt s))
(hyp 3.0 4.0)

;;; define-internal-mutual
(define (parity n)
  (define (ev? k) (if (= k 0) #t (od? (- k 1))))
  (define (od? k) (if (= k 0) #f (ev? (- k 1))))
  (if (ev? n) 'even 'odd))
(list (parity 10) (parity 7))

;;; define-internal-in-let-body
(let ((a 5))
  (define b (* a 2))
  (define (c) (+ a b))
  (c))

;;; define-internal-in-lambda-body
((lambda (n)
   (define m (* n n))
   (+ m 1))
 7)

;;; define-dotted-args-rest
(define (f a . rest) rest)
(f 1 2 3)

;;; define-dotted-args-empty-rest
(define (f a . rest) rest)
(f 1)

;;; define-dotted-args-two-fixed
(define (f a b . rest) (list a b (length rest)))
(f 1 2 3 4 5)

;;; define-variadic-only
(define (f . args) (length args))
(list (f) (f 1) (f 1 2 3))

;;; define-shadows-primitive-param
(define (count-items list) (length list))
(count-items '(a b c d))

;;; define-shadow-primitive-locally
(let ((car cdr)) (car '(1 2 3)))

;;; define-user-function-named-like-helper
(define (add1 n) (+ n 1))
(define (compose2 f g) (lambda (v) (f (g v))))
((compose2 add1 add1) 5)

;;; lambda-immediate
((lambda (a b) (- a b)) 10 3)

;;; lambda-rest-all
((lambda args args) 1 2 3)

;;; lambda-rest-none
((lambda args args))

;;; lambda-rest-after-fixed
((lambda (a . more) (cons a (length more))) 'x 'y 'z)

;;; lambda-no-args
((lambda () 42))

;;; lambda-body-sequence
((lambda (n) (+ n 1) (+ n 2) (* n 3)) 5)

;;; lambda-nested-closure
(((lambda (a) (lambda (b) (+ a b))) 3) 4)

;;; let-basic
(let ((a 1) (b 2)) (+ a b))

;;; let-parallel-scope
(define a 100)
(let ((a 1) (b a)) (list a b))

;;; let-shadowing
(let ((x 1)) (let ((x (+ x 1))) (let ((x (* x 10))) x)))

;;; let-empty-bindings
(let () 5)

;;; let-star-sequential
(let* ((a 2) (b (* a 3)) (c (+ a b))) (list a b c))

;;; let-star-shadow-same-name
(let* ((x 1) (x (+ x 1)) (x (* x 5))) x)

;;; letrec-factorial
(letrec ((fact (lambda (n) (if (= n 0) 1 (* n (fact (- n 1)))))))
  (fact 10))

;;; letrec-mutual
(letrec ((ev? (lambda (n) (if (= n 0) #t (od? (- n 1)))))
         (od? (lambda (n) (if (= n 0) #f (ev? (- n 1))))))
  (list (ev? 100) (od? 7) (ev? 3)))

;;; letrec-star-sequential
(letrec* ((a 5) (b (* a 2)) (f (lambda () (+ a b))))
  (f))

;;; named-let-sum
(let loop ((i 0) (acc 0))
  (if (> i 10) acc (loop (+ i 1) (+ acc i))))

;;; named-let-build-list
(let loop ((i 5) (acc '()))
  (if (= i 0) acc (loop (- i 1) (cons i acc))))

;;; named-let-non-tail
(let count ((n 5))
  (if (= n 0) '() (cons n (count (- n 1)))))

;;; named-let-custom-name
(let iter ((a 0) (b 1) (k 0))
  (if (= k 30) a (iter b (+ a b) (+ k 1))))

;;; named-let-loop-name-shadows-form
(define (sum-to n)
  (let loop ((i 1) (s 0))
    (if (> i n) s (loop (+ i 1) (+ s i)))))
(sum-to 100)

;;; local-binding-named-recur
(let ((recur 2)) (* recur 3))

;;; do-basic
(do ((i 0 (+ i 1)) (acc 0 (+ acc i))) ((= i 5) acc))

;;; do-no-step-variable
(do ((i 0 (+ i 1)) (k 7)) ((= i 3) (* k i)))

;;; do-build-list
(do ((i 0 (+ i 1)) (acc '() (cons (* i i) acc))) ((= i 6) (reverse acc)))

;;; do-result-multiple-expressions
(do ((i 3 (- i 1))) ((= i 0) 'ignored 'done))

;;; do-nested
(do ((i 0 (+ i 1)) (s 0 (+ s (do ((j 0 (+ j 1)) (t 0 (+ t j))) ((= j i) t)))))
    ((= i 6) s))

;;; if-true
(if #t 'yes 'no)

;;; if-false
(if #f 'yes 'no)

;;; if-only-false-is-false
(list (if 0 'a 'b) (if '() 'a 'b) (if 0.0 'a 'b))

;;; if-one-armed-true
(if (> 3 2) 'taken)

;;; if-nested
(define (sign n) (if (< n 0) -1 (if (= n 0) 0 1)))
(list (sign -5) (sign 0) (sign 7.5))

;;; cond-first-match
(cond ((> 1 2) 'a) ((> 3 2) 'b) (else 'c))

;;; cond-else
(cond ((> 1 2) 'a) ((> 1 3) 'b) (else 'c))

;;; cond-multi-expression-body
(cond ((< 1 2) 1 2 3) (else 4))

;;; cond-test-only-clause
(cond ((assv 2 '((1 . 10) (2 . 20)))) (else #f))

;;; cond-classify
(define (classify n)
  (cond ((< n 0) 'negative)
        ((= n 0) 'zero)
        ((< n 10) 'small)
        (else 'large)))
(map classify '(-3 0 4 100))

;;; case-symbols
(define (kind s)
  (case s
    ((apple banana) 'fruit)
    ((carrot) 'vegetable)
    (else 'unknown)))
(map kind '(apple carrot rock banana))

;;; case-integers
(case (* 2 3) ((2 3 5 7) 'prime) ((1 4 6 8 9) 'composite) (else 'other))

;;; case-eqv-distinguishes-exactness
(case 2.0 ((2) 'exact-two) (else 'not-matched))

;;; case-inexact-datum
(case 2.5 ((2.5) 'matched) (else 'no))

;;; case-else-multi
(case 'z ((a) 1) (else 2 3))

;;; and-empty
(and)

;;; and-returns-last
(and 1 2 'three)

;;; and-short-circuit
(and 1 #f (car '()))

;;; or-empty
(or)

;;; or-returns-first-true
(or #f 7 (car '()))

;;; or-all-false
(or #f #f)

;;; when-true
(when (> 2 1) 'a 'b)

;;; unless-false
(unless (> 1 2) 'x 'y)

;;; begin-sequence
(begin 1 2 3)

;;; begin-toplevel-defines
(begin (define p 3) (define q 4))
(* p q)

;;; quote-symbol
'hello

;;; quote-list
'(a b c)

;;; quote-nested-list
'(1 (2 3) (4 (5)))

;;; quote-empty
'()

;;; quote-long-form
(quote (x y))

;;; quote-numbers-and-booleans
'(1 2.5 #t #f)

;;; quote-dotted
(car '((1 . 2) 3))

;;; quote-car-of-quoted
(car (cdr '(alpha beta gamma)))

;;; do-fresh-binding-per-iteration
(do ((i 0 (+ i 1)) (fs '() (cons (lambda () i) fs))) ((= i 3) (map (lambda (f) (f)) fs)))

;;; named-let-body-with-internal-define
(let loop ((i 0) (acc '()))
  (define sq (* i i))
  (if (= i 4) (reverse acc) (loop (+ i 1) (cons sq acc))))

;;; let-star-empty
(let* () 5)

;;; letrec-empty
(letrec () 6)

;;; define-redefines-primitive
(define (square x) (+ x x))
(square 3)

;;; define-alias-of-primitive
(define first car)
(define rest cdr)
(first (rest '(1 2 3)))

;;; boolean-long-literals
(list #true #false)

;;; float-literal-uppercase-exponent
(+ 1E3 2.5e-1)

;;; eq-primitive-identity
(eq? car car)

;;; cond-else-only
(cond (else 'only-else))

;;; case-multiple-symbols-and-numbers
(define (f x) (case x ((1 2 3) 'small) ((a b) 'letter) ((#t) 'true) (else 'other)))
(map f (list 2 'b #t 9))

;;; internal-define-shadows-global
(define x 10)
(define (f) (define x 20) x)
(list (f) x)

;;; lambda-captures-argument-shadowing-global
(define n 5)
(define (make n) (lambda () n))
(list ((make 7)) n)

;;; and-or-nested
(list (and 1 (or #f 2) (and 3 4)) (or (and #f 1) (and 2 #f) 'z))

;;; do-variable-named-like-primitive
(do ((list '(1 2 3) (cdr list)) (n 0 (+ n 1))) ((null? list) n))

;;; lambda-param-named-like-form
(define (f if) (+ if 1))
(f 2)

;;; let-binding-named-like-form
(let ((define 5)) (* define 2))

;;; let-binding-named-quote
(let ((quote -)) (quote 5 3))

;;; shadow-lambda
(define (f lambda) (* lambda 2))
(f 4)

;;; apply-with-closure-rest
(define (f . xs) xs)
(apply f 1 '(2 3))

;;; variadic-compare-single
(list (< 1) (= 5) (> 2))

;;; reader-block-comment
(+ 1 #| a block
comment |# 2)

;;; reader-datum-comment
(list 1 #;(this is skipped) 2)

;;; reader-nested-block-comment
(+ 1 #| outer #| inner |# still |# 2)

;;; reader-infinity-literals
(list (> +inf.0 1e308) (< -inf.0 -1e308))

;;; reader-float-forms
(list (+ +.5 1) (+ 1.e2 1) (* 1.5e-2 100))
