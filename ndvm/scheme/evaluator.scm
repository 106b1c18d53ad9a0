;;; A meta-circular evaluator for the NDVM language, written in the NDVM language.
;;;
;;; (mc-run program bindings) evaluates PROGRAM, a list of top-level forms given as quoted data,
;;; with BINDINGS (an association list from the program's parameter and input names to the
;;; host's values) and the primitive procedures as its global environment. The numbers the
;;; interpreted program computes with are the host's own, so gradients flow through the
;;; interpreter into the host's parameters.
;;;
;;; The evaluator analyzes before it runs (in the manner of SICP 4.1.7): (mc-analyze x cx) turns
;;; the expression X into CODE, a host procedure (lambda (env) ...) that computes its value in a
;;; run-time environment. Syntax is dispatched once per expression, not once per evaluation;
;;; each variable is resolved once: a global (parameter, input, primitive) becomes a constant,
;;; a local one the frame depth where it lives.
;;;
;;; The host language has no mutation, and the evaluator uses none:
;;; - a run-time environment is a list of frames; a frame is a pair (values . procedures).
;;;   The frame of a procedure call, a let, a let*, a do or a named let holds its values by
;;;   position: values is the list of the arguments (or inits) in the order of the names (a
;;;   let* adds each value at the front), and the analysis knows each name's position. The
;;;   frame of a body's definitions or a letrec holds them by name:
;;;     values      an association list (name . value); value definitions are added in order
;;;                 to a rebuilt frame
;;;     procedures  an association list (name . lambda-code) holding the analyzed lambdas.
;;;                 Looking one up makes a closure over the environment that starts at its own
;;;                 frame, so a procedure sees itself, its siblings and the values defined so
;;;                 far: recursion is tied by construction, never by assignment.
;;;   A named let's procedure is tied to its frame once, by the host's own letrec*.
;;; - the analysis context CX is a pair (frames . globals): frames is the compile-time image of
;;;   the run-time frames, each a pair (value-names . procedure-names), or (value-names . #f)
;;;   for a positional frame; globals the association list of parameters, inputs and
;;;   primitives.
;;; - an interpreted procedure is a host procedure, so interpreted and primitive procedures are
;;;   called alike, and host primitives that take procedures (map, apply, filter, the folds)
;;;   accept interpreted ones.
;;; - the code of every tail position (if, cond, case, and, or, when, unless, the last form of a
;;;   body, the call of an application) is called in tail position of the enclosing code, so the
;;;   interpreted program's tail calls are tail calls of the host and do not grow its stack.
;;;
;;; All names here start with `mc-` so that the host program's parameter and input names, which
;;; sit beside them at the host's top level, cannot collide with them.

;;; ---------------------------------------------------------------------------------------
;;; Errors of the interpreted program: a kind (a symbol) and the offending datum. The runtime's
;;; `error` writes symbols and numbers as they are (a list only as "a pair"), so the evaluator
;;; passes names and counts.

(define (mc-fail kind irritant) (error kind irritant))

;;; ---------------------------------------------------------------------------------------
;;; Run-time environments

;; ENV with NAME bound to VALUE in its first frame (rebuilt, never changed: closures made
;; before keep the frame they saw).
(define (mc-frame-add env name value)
  (let ((frame (car env)))
    (cons (cons (cons (cons name value) (car frame)) (cdr frame)) (cdr env))))

(define (mc-frame-value name frame)
  (let ((hit (assq name (car frame))))
    (if hit (cdr hit) (mc-fail 'unbound-variable name))))

;; The positional values of the formal PARAMS with a rest parameter (an improper list or a
;; single symbol) for the actual ARGS: the fixed arguments, then the list of the rest.
(define (mc-rest-arguments params args)
  (cond ((symbol? params) (list args))
        ((null? args) (error 'too-few-arguments 'missing (car params)))
        (else (cons (car args) (mc-rest-arguments (cdr params) (cdr args))))))

(define (mc-arity-error params args)
  (error (if (> (length args) (length params)) 'too-many-arguments 'too-few-arguments)
         'expected (length params) 'got (length args)))

;; An analyzed lambda, (params count code) with COUNT the number of parameters (#f with a rest
;; parameter), closed over ENV. The argument list itself is the frame's values.
(define (mc-make-procedure lambda-code env)
  (let ((params (car lambda-code))
        (count (car (cdr lambda-code)))
        (code (car (cdr (cdr lambda-code)))))
    (if count
        (lambda args
          (if (= (length args) count)
              (code (cons (cons args '()) env))
              (mc-arity-error params args)))
        (lambda args (code (cons (cons (mc-rest-arguments params args) '()) env))))))

(define (mc-apply procedure args)
  (if (procedure? procedure)
      (apply procedure args)
      (mc-fail 'not-a-procedure procedure)))

;; The values of CODES in ENV, left to right.
(define (mc-run-all codes env)
  (if (null? codes)
      '()
      (let ((first ((car codes) env)))
        (cons first (mc-run-all (cdr codes) env)))))


;;; ---------------------------------------------------------------------------------------
;;; Analysis contexts

;; CX with a frame of definitions (values and procedures found by name)
(define (mc-push cx value-names procedure-names)
  (cons (cons (cons value-names procedure-names) (car cx)) (cdr cx)))

;; CX with a frame of values by position
(define (mc-push-positional cx names)
  (cons (cons (cons names #f) (car cx)) (cdr cx)))

;; Where NAME is bound among FRAMES: (value depth), (position depth index),
;; (procedure depth) or #f.
(define (mc-resolve name frames depth)
  (if (null? frames)
      #f
      (let ((names (car (car frames))) (procedure-names (cdr (car frames))))
        (cond ((memq name names)
               (if procedure-names
                   (list 'value depth)
                   (list 'position depth (mc-index name names 0))))
              ((if procedure-names (memq name procedure-names) #f) (list 'procedure depth))
              (else (mc-resolve name (cdr frames) (+ depth 1)))))))

(define (mc-index name names index)
  (if (eq? name (car names)) index (mc-index name (cdr names) (+ index 1))))

(define (mc-param-count params)
  (cond ((null? params) 0)
        ((symbol? params) #f)
        (else (let ((rest (mc-param-count (cdr params)))) (if rest (+ rest 1) #f)))))

(define (mc-param-names params)
  (cond ((null? params) '())
        ((symbol? params) (list params))
        (else (cons (car params) (mc-param-names (cdr params))))))

(define (mc-constant value) (lambda (env) value))

;;; ---------------------------------------------------------------------------------------
;;; Analysis

(define (mc-analyze x cx)
  (cond ((symbol? x) (mc-analyze-variable x cx))
        ((pair? x)
         ;; a special form, unless the program binds that name itself
         (let ((special (if (symbol? (car x))
                            (if (mc-resolve (car x) (car cx) 0) #f (assq (car x) mc-special-forms))
                            #f)))
           (if special
               ((cdr special) x cx)
               (mc-analyze-application x cx))))
        ((null? x) (mc-fail 'empty-application x))
        (else (mc-constant x))))

(define (mc-analyze-all xs cx)
  (if (null? xs)
      '()
      (let ((first (mc-analyze (car xs) cx)))
        (cons first (mc-analyze-all (cdr xs) cx)))))

(define (mc-analyze-variable name cx)
  (let ((where (mc-resolve name (car cx) 0)))
    (if where
        (cond ((eq? (car where) 'position)
               (mc-position-code (car (cdr where)) (car (cdr (cdr where)))))
              ((eq? (car where) 'value) (mc-value-code name (car (cdr where))))
              (else (mc-procedure-code name (car (cdr where)))))
        (let ((global (assq name (cdr cx))))
          (if global
              (mc-constant (cdr global))
              (lambda (env) (mc-fail 'unbound-variable name)))))))

(define (mc-value-code name depth)
  (cond ((= depth 0) (lambda (env) (mc-frame-value name (car env))))
        ((= depth 1) (lambda (env) (mc-frame-value name (car (cdr env)))))
        ((= depth 2) (lambda (env) (mc-frame-value name (car (cdr (cdr env))))))
        (else (lambda (env) (mc-frame-value name (car (list-tail env depth)))))))

;; The value at INDEX of the positional frame at DEPTH
(define (mc-position-code depth index)
  (cond ((= depth 0)
         (cond ((= index 0) (lambda (env) (car (car (car env)))))
               ((= index 1) (lambda (env) (car (cdr (car (car env))))))
               (else (lambda (env) (list-ref (car (car env)) index)))))
        ((= depth 1)
         (cond ((= index 0) (lambda (env) (car (car (car (cdr env))))))
               ((= index 1) (lambda (env) (car (cdr (car (car (cdr env)))))))
               (else (lambda (env) (list-ref (car (car (cdr env))) index)))))
        (else (lambda (env) (list-ref (car (car (list-tail env depth))) index)))))

(define (mc-procedure-code name depth)
  (lambda (env)
    (let ((frame-env (list-tail env depth)))
      (mc-make-procedure (cdr (assq name (cdr (car frame-env)))) frame-env))))

;; The operator, when it is a global procedure (a primitive), is called directly; otherwise it
;; is checked to be a procedure first. Calls of up to three arguments skip building a list.
(define (mc-analyze-application x cx)
  (let ((operands (mc-analyze-all (cdr x) cx))
        (global (if (symbol? (car x))
                    (if (mc-resolve (car x) (car cx) 0) #f (assq (car x) (cdr cx)))
                    #f)))
    (cond ((if global (eq? (car x) 'apply) #f) (mc-apply-call operands))
          ((if global (procedure? (cdr global)) #f) (mc-primitive-call (cdr global) operands))
          (else (mc-general-call (mc-analyze (car x) cx) operands)))))

;; (apply f a ... list): the host's `apply` written out, in tail position, so that a tail call
;; through apply stays a tail call (the runtime makes `apply` a tail call only where it is
;; called by name, not as a procedure value).
(define (mc-apply-call operands)
  (lambda (env)
    (let ((values (mc-run-all operands env)))
      (mc-apply (car values) (mc-spread (cdr values))))))

;; (a ... list) -> (a ... . list), the arguments `apply` passes
(define (mc-spread args)
  (if (null? (cdr args)) (car args) (cons (car args) (mc-spread (cdr args)))))

;; (A primitive's own error names the variable it was called through: `primitive`.)
(define (mc-primitive-call primitive operands)
  (let ((n (length operands)))
    (cond ((= n 1) (let ((a (car operands))) (lambda (env) (primitive (a env)))))
          ((= n 2) (let ((a (car operands)) (b (car (cdr operands))))
                     (lambda (env) (primitive (a env) (b env)))))
          ((= n 3) (let ((a (car operands)) (b (car (cdr operands))) (c (car (cdr (cdr operands)))))
                     (lambda (env) (primitive (a env) (b env) (c env)))))
          (else (lambda (env) (apply primitive (mc-run-all operands env)))))))

(define (mc-general-call operator operands)
  (let ((n (length operands)))
    (cond ((= n 0)
           (lambda (env)
             (let ((procedure (operator env)))
               (if (procedure? procedure) (procedure) (mc-fail 'not-a-procedure procedure)))))
          ((= n 1)
           (let ((a (car operands)))
             (lambda (env)
               (let ((procedure (operator env)))
                 (if (procedure? procedure)
                     (procedure (a env))
                     (mc-fail 'not-a-procedure procedure))))))
          ((= n 2)
           (let ((a (car operands)) (b (car (cdr operands))))
             (lambda (env)
               (let ((procedure (operator env)))
                 (if (procedure? procedure)
                     (procedure (a env) (b env))
                     (mc-fail 'not-a-procedure procedure))))))
          ((= n 3)
           (let ((a (car operands)) (b (car (cdr operands))) (c (car (cdr (cdr operands)))))
             (lambda (env)
               (let ((procedure (operator env)))
                 (if (procedure? procedure)
                     (procedure (a env) (b env) (c env))
                     (mc-fail 'not-a-procedure procedure))))))
          (else
           (lambda (env)
             (let ((procedure (operator env)))
               (mc-apply procedure (mc-run-all operands env))))))))

;; A sequence (begin, a clause): all but the last for their errors, the last in tail position.
(define (mc-analyze-sequence forms cx)
  (if (null? forms)
      (mc-fail 'empty-sequence forms)
      (mc-sequence-code (mc-analyze-all forms cx))))

(define (mc-sequence-code codes)
  (if (null? (cdr codes))
      (car codes)
      (let ((first (car codes)) (rest (mc-sequence-code (cdr codes))))
        (lambda (env) (first env) (rest env)))))

;; An analyzed lambda: (params count code), the body analyzed in a frame of its parameters.
(define (mc-analyze-lambda-parts params body cx)
  (list params (mc-param-count params)
        (mc-analyze-body body (mc-push-positional cx (mc-param-names params)))))

;;; ---------------------------------------------------------------------------------------
;;; Bodies and definitions
;;;
;;; A body (of a lambda, a let, the program itself) may start with or interleave definitions.
;;; Its definitions make one frame: the procedures are in it from the start (analyzed once, so
;;; they can call each other in any order); the values are added in order as they are
;;; evaluated (letrec* semantics: a value used before its definition is an unbound variable).

(define (mc-definition? form)
  (if (pair? form) (eq? (car form) 'define) #f))

;; (param name init ...) at the top level: the host has already bound NAME.
(define (mc-declaration? form)
  (if (pair? form) (eq? (car form) 'param) #f))

(define (mc-begin? form)
  (if (pair? form) (eq? (car form) 'begin) #f))

;; (define (f . params) body ...) or (define f (lambda params body ...))
(define (mc-procedure-definition? form)
  (if (mc-definition? form)
      (if (pair? (cdr form))
          (if (pair? (car (cdr form)))
              #t
              (if (pair? (cdr (cdr form)))
                  (let ((value (car (cdr (cdr form)))))
                    (if (pair? value) (eq? (car value) 'lambda) #f))
                  #f))
          #f)
      #f))

;; (name . (params . body)) of a procedure definition
(define (mc-procedure-entry form)
  (let ((target (car (cdr form))))
    (if (pair? target)
        (cons (car target) (cons (cdr target) (cdr (cdr form))))
        (cons target (cdr (car (cdr (cdr form))))))))

(define (mc-procedure-entries forms)
  (cond ((null? forms) '())
        ((mc-procedure-definition? (car forms))
         (cons (mc-procedure-entry (car forms)) (mc-procedure-entries (cdr forms))))
        (else (mc-procedure-entries (cdr forms)))))

;; (define name expression): checked, and its name
(define (mc-value-definition-name form)
  (if (if (pair? (cdr form)) (if (symbol? (car (cdr form))) (pair? (cdr (cdr form))) #f) #f)
      (car (cdr form))
      (mc-fail 'bad-definition form)))

(define (mc-value-definition-names forms)
  (cond ((null? forms) '())
        ((if (mc-definition? (car forms)) (not (mc-procedure-definition? (car forms))) #f)
         (cons (mc-value-definition-name (car forms)) (mc-value-definition-names (cdr forms))))
        (else (mc-value-definition-names (cdr forms)))))

;; Whether FORMS define anything, also inside a (begin ...) among them (it splices).
(define (mc-has-definitions? forms)
  (cond ((null? forms) #f)
        ((mc-definition? (car forms)) #t)
        ((mc-declaration? (car forms)) #t)
        ((mc-begin? (car forms))
         (if (mc-has-definitions? (cdr (car forms))) #t (mc-has-definitions? (cdr forms))))
        (else (mc-has-definitions? (cdr forms)))))

;; FORMS with each (begin form ...) among them replaced by its forms.
(define (mc-splice-begins forms)
  (cond ((null? forms) '())
        ((mc-begin? (car forms))
         (append (mc-splice-begins (cdr (car forms))) (mc-splice-begins (cdr forms))))
        (else (cons (car forms) (mc-splice-begins (cdr forms))))))

;; The context of the frame that the definitions FORMS make.
(define (mc-push-definitions cx forms)
  (mc-push cx (mc-value-definition-names forms) (map car (mc-procedure-entries forms))))

;; The run-time procedures of that frame: (name . lambda-code), analyzed in INNER.
(define (mc-analyze-procedures forms inner)
  (map (lambda (entry)
         (cons (car entry) (mc-analyze-lambda-parts (car (cdr entry)) (cdr (cdr entry)) inner)))
       (mc-procedure-entries forms)))

(define (mc-analyze-body body cx)
  (if (mc-has-definitions? body)
      (let* ((forms (mc-splice-begins body))
             (inner (mc-push-definitions cx forms))
             (procedures (mc-analyze-procedures forms inner))
             (code (mc-analyze-body-forms forms inner)))
        (lambda (env) (code (cons (cons '() procedures) env))))
      (mc-analyze-sequence body cx)))

;; CODE for FORMS in an environment whose first frame is their body's frame.
(define (mc-analyze-body-forms forms cx)
  (if (null? forms)
      (lambda (env) (mc-fail 'body-without-expression forms))
      (let ((form (car forms)) (rest (cdr forms)))
        (cond ((mc-procedure-definition? form) (mc-analyze-body-forms rest cx))
              ((mc-definition? form)
               (let ((name (mc-value-definition-name form))
                     (init (mc-analyze (car (cdr (cdr form))) cx))
                     (next (mc-analyze-body-forms rest cx)))
                 (lambda (env) (next (mc-frame-add env name (init env))))))
              ((mc-declaration? form) (mc-analyze-body-forms rest cx))
              ((null? rest) (mc-analyze form cx))
              (else
               (let ((first (mc-analyze form cx)) (next (mc-analyze-body-forms rest cx)))
                 (lambda (env) (first env) (next env))))))))

;; CODE from an environment to that environment with the value definitions of FORMS added.
(define (mc-analyze-definition-values forms cx)
  (cond ((null? forms) (lambda (env) env))
        ((mc-procedure-definition? (car forms)) (mc-analyze-definition-values (cdr forms) cx))
        (else
         (let ((name (mc-value-definition-name (car forms)))
               (init (mc-analyze (car (cdr (cdr (car forms)))) cx))
               (next (mc-analyze-definition-values (cdr forms) cx)))
           (lambda (env) (next (mc-frame-add env name (init env))))))))

;;; ---------------------------------------------------------------------------------------
;;; Special forms: each takes the whole form and the analysis context, and returns CODE.

(define (mc-analyze-quote x cx) (mc-constant (car (cdr x))))

(define (mc-analyze-if x cx)
  (let ((test (mc-analyze (car (cdr x)) cx))
        (then (mc-analyze (car (cdr (cdr x))) cx))
        (otherwise (if (null? (cdr (cdr (cdr x))))
                       (mc-constant #f)
                       (mc-analyze (car (cdr (cdr (cdr x)))) cx))))
    (lambda (env) (if (test env) (then env) (otherwise env)))))

(define (mc-analyze-cond x cx) (mc-analyze-clauses (cdr x) cx))

(define (mc-analyze-clauses clauses cx)
  (if (null? clauses)
      (mc-constant #f)
      (let ((clause (car clauses)))
        (if (eq? (car clause) 'else)
            (mc-analyze-sequence (cdr clause) cx)
            (let ((test (mc-analyze (car clause) cx))
                  (rest (mc-analyze-clauses (cdr clauses) cx)))
              (cond ((null? (cdr clause))
                     (lambda (env) (let ((value (test env))) (if value value (rest env)))))
                    ((eq? (car (cdr clause)) '=>)
                     (let ((receiver (mc-analyze (car (cdr (cdr clause))) cx)))
                       (lambda (env)
                         (let ((value (test env)))
                           (if value (mc-apply (receiver env) (list value)) (rest env))))))
                    (else
                     (let ((body (mc-analyze-sequence (cdr clause) cx)))
                       (lambda (env) (if (test env) (body env) (rest env)))))))))))

(define (mc-analyze-case x cx)
  (let ((key (mc-analyze (car (cdr x)) cx))
        (clauses (map (lambda (clause) (cons (car clause) (mc-analyze-sequence (cdr clause) cx)))
                      (cdr (cdr x)))))
    (lambda (env) (mc-case-select (key env) clauses env))))

(define (mc-case-select key clauses env)
  (cond ((null? clauses) #f)
        ((eq? (car (car clauses)) 'else) ((cdr (car clauses)) env))
        ((memv key (car (car clauses))) ((cdr (car clauses)) env))
        (else (mc-case-select key (cdr clauses) env))))

(define (mc-analyze-and x cx)
  (if (null? (cdr x)) (mc-constant #t) (mc-and-code (mc-analyze-all (cdr x) cx))))

(define (mc-and-code codes)
  (if (null? (cdr codes))
      (car codes)
      (let ((first (car codes)) (rest (mc-and-code (cdr codes))))
        (lambda (env) (if (first env) (rest env) #f)))))

(define (mc-analyze-or x cx)
  (if (null? (cdr x)) (mc-constant #f) (mc-or-code (mc-analyze-all (cdr x) cx))))

(define (mc-or-code codes)
  (if (null? (cdr codes))
      (car codes)
      (let ((first (car codes)) (rest (mc-or-code (cdr codes))))
        (lambda (env) (let ((value (first env))) (if value value (rest env)))))))

(define (mc-analyze-when x cx)
  (let ((test (mc-analyze (car (cdr x)) cx)) (body (mc-analyze-sequence (cdr (cdr x)) cx)))
    (lambda (env) (if (test env) (body env) #f))))

(define (mc-analyze-unless x cx)
  (let ((test (mc-analyze (car (cdr x)) cx)) (body (mc-analyze-sequence (cdr (cdr x)) cx)))
    (lambda (env) (if (test env) #f (body env)))))

(define (mc-analyze-begin x cx) (mc-analyze-sequence (cdr x) cx))

(define (mc-analyze-lambda x cx)
  (let ((lambda-code (mc-analyze-lambda-parts (car (cdr x)) (cdr (cdr x)) cx)))
    (lambda (env) (mc-make-procedure lambda-code env))))

(define (mc-analyze-let x cx)
  (if (symbol? (car (cdr x)))
      (mc-analyze-named-let (car (cdr x)) (car (cdr (cdr x))) (cdr (cdr (cdr x))) cx)
      (let* ((names (map car (car (cdr x))))
             (inits (mc-analyze-all (map mc-binding-init (car (cdr x))) cx))
             (body (mc-analyze-body (cdr (cdr x)) (mc-push-positional cx names))))
        (lambda (env) (body (cons (cons (mc-run-all inits env) '()) env))))))

(define (mc-binding-init binding) (car (cdr binding)))

;; (let name ((var init) ...) body ...): NAME is bound, in a frame of its own, to the procedure;
;; the inits are evaluated in the outer environment.
(define (mc-analyze-named-let name bindings body cx)
  (let ((inits (mc-analyze-all (map mc-binding-init bindings) cx))
        (lambda-code (mc-analyze-lambda-parts (map car bindings) body
                                              (mc-push-positional cx (list name)))))
    (lambda (env)
      (apply (mc-make-loop-procedure lambda-code env) (mc-run-all inits env)))))

;; The procedure of a named let closed over ENV extended with a frame that holds the procedure
;; itself. The host's own letrec* ties that knot, once per entry into the loop (a loop's
;; iterations then find the procedure as a plain value instead of building a closure each).
(define (mc-make-loop-procedure lambda-code env)
  (let ((params (car lambda-code))
        (count (car (cdr lambda-code)))
        (code (car (cdr (cdr lambda-code)))))
    (letrec* ((procedure
               (if count
                   (lambda args
                     (if (= (length args) count)
                         (code (cons (cons args '()) loop-env))
                         (mc-arity-error params args)))
                   (lambda args (code (cons (cons (mc-rest-arguments params args) '()) loop-env)))))
              (loop-env (cons (cons (list procedure) '()) env)))
      procedure)))

;; let*: one positional frame, extended binding by binding at its front; each init sees the
;; bindings before it. The names are kept in the same order (latest first), so a name's
;; position is known when the code that reads it is analyzed.
(define (mc-analyze-let* x cx)
  (let ((code (mc-let*-code (car (cdr x)) (cdr (cdr x)) cx '())))
    (lambda (env) (code (cons (cons '() '()) env)))))

(define (mc-let*-code bindings body cx names)
  (if (null? bindings)
      (mc-analyze-body body (mc-push-positional cx names))
      (let ((init (mc-analyze (car (cdr (car bindings))) (mc-push-positional cx names)))
            (rest (mc-let*-code (cdr bindings) body cx (cons (car (car bindings)) names))))
        (lambda (env)
          (rest (cons (cons (cons (init env) (car (car env))) '()) (cdr env)))))))

;; letrec and letrec*: the bindings are the definitions of one frame, the body a new scope.
(define (mc-analyze-letrec x cx)
  (let* ((forms (map mc-binding-definition (car (cdr x))))
         (inner (mc-push-definitions cx forms))
         (procedures (mc-analyze-procedures forms inner))
         (bind (mc-analyze-definition-values forms inner))
         (body (mc-analyze-body (cdr (cdr x)) inner)))
    (lambda (env) (body (bind (cons (cons '() procedures) env))))))

(define (mc-binding-definition binding) (cons 'define binding))

;; (loop ((var init) ...) body ...) with (recur e ...) in tail position is a named let whose
;; name is recur. (Where the program binds `loop` itself, (loop ...) is a call: see mc-analyze.)
(define (mc-analyze-loop x cx)
  (mc-analyze-named-let 'recur (car (cdr x)) (cdr (cdr x)) cx))

;; (do ((var init step) ...) (test result ...) body ...): each iteration evaluates the body,
;; then binds the variables to their steps in a new frame.
(define (mc-analyze-do x cx)
  (let* ((specs (car (cdr x)))
         (names (map car specs))
         (inits (mc-analyze-all (map mc-binding-init specs) cx))
         (inner (mc-push-positional cx names))
         ;; a variable without a step keeps its value
         (steps (map (lambda (spec)
                       (mc-analyze (if (null? (cdr (cdr spec))) (car spec) (car (cdr (cdr spec))))
                                   inner))
                     specs))
         (exit (car (cdr (cdr x))))
         (test (mc-analyze (car exit) inner))
         (result (if (null? (cdr exit)) (mc-constant #f) (mc-analyze-sequence (cdr exit) inner)))
         (body (if (null? (cdr (cdr (cdr x)))) #f (mc-analyze-sequence (cdr (cdr (cdr x))) inner))))
    (lambda (env)
      (mc-do-loop steps test result body (cons (cons (mc-run-all inits env) '()) env) env))))

(define (mc-do-loop steps test result body loop-env env)
  (if (test loop-env)
      (result loop-env)
      (begin
        (if body (body loop-env) #f)
        (mc-do-loop steps test result body (cons (cons (mc-run-all steps loop-env) '()) env) env))))

(define (mc-analyze-define x cx)
  (mc-fail 'definition-in-expression-context (mc-definition-target x)))

(define (mc-analyze-param x cx)
  (mc-fail 'param-declaration-not-at-top-level (mc-definition-target x)))

;; The name a (define ...) or (param ...) form defines, for messages
(define (mc-definition-target x)
  (cond ((not (pair? (cdr x))) x)
        ((pair? (car (cdr x))) (car (car (cdr x))))
        (else (car (cdr x)))))

(define mc-special-forms
  (list (cons 'if mc-analyze-if)
        (cons 'quote mc-analyze-quote)
        (cons 'let mc-analyze-let)
        (cons 'cond mc-analyze-cond)
        (cons 'lambda mc-analyze-lambda)
        (cons 'let* mc-analyze-let*)
        (cons 'and mc-analyze-and)
        (cons 'or mc-analyze-or)
        (cons 'begin mc-analyze-begin)
        (cons 'letrec mc-analyze-letrec)
        (cons 'letrec* mc-analyze-letrec)
        (cons 'when mc-analyze-when)
        (cons 'unless mc-analyze-unless)
        (cons 'case mc-analyze-case)
        (cons 'do mc-analyze-do)
        (cons 'loop mc-analyze-loop)
        (cons 'define mc-analyze-define)
        (cons 'param mc-analyze-param)))

;;; ---------------------------------------------------------------------------------------
;;; Primitive procedures: the host's own (native/src/prims.h), so their values and gradients
;;; are the host's.

(define mc-primitives
  (list (cons '+ +) (cons '- -) (cons '* *) (cons '/ /)
        (cons '= =) (cons '< <) (cons '> >) (cons '<= <=) (cons '>= >=)
        (cons 'min min) (cons 'max max)
        (cons 'abs abs) (cons 'floor floor) (cons 'ceiling ceiling) (cons 'round round)
        (cons 'truncate truncate)
        (cons 'exp exp) (cons 'log log) (cons 'sqrt sqrt) (cons 'sin sin) (cons 'cos cos)
        (cons 'tan tan) (cons 'asin asin) (cons 'acos acos) (cons 'atan atan) (cons 'tanh tanh)
        (cons 'square square) (cons 'sigmoid sigmoid) (cons 'logistic logistic)
        (cons 'softplus softplus)
        (cons 'expt expt) (cons 'quotient quotient) (cons 'remainder remainder)
        (cons 'modulo modulo)
        (cons 'exact->inexact exact->inexact) (cons 'inexact inexact)
        (cons 'inexact->exact inexact->exact) (cons 'exact exact)
        (cons 'zero? zero?) (cons 'positive? positive?) (cons 'negative? negative?)
        (cons 'even? even?) (cons 'odd? odd?) (cons 'number? number?) (cons 'integer? integer?)
        (cons 'exact? exact?) (cons 'inexact? inexact?)
        (cons 'boolean? boolean?) (cons 'symbol? symbol?) (cons 'procedure? procedure?)
        (cons 'null? null?) (cons 'pair? pair?) (cons 'list? list?)
        (cons 'not not) (cons 'eq? eq?) (cons 'eqv? eqv?) (cons 'equal? equal?)
        (cons 'cons cons) (cons 'car car) (cons 'cdr cdr)
        (cons 'caar caar) (cons 'cadr cadr) (cons 'cdar cdar) (cons 'cddr cddr)
        (cons 'caddr caddr) (cons 'cdddr cdddr) (cons 'cadddr cadddr)
        (cons 'list list) (cons 'length length) (cons 'list-ref list-ref)
        (cons 'list-tail list-tail) (cons 'append append) (cons 'reverse reverse)
        (cons 'map map) (cons 'for-each for-each) (cons 'filter filter)
        (cons 'fold-left fold-left) (cons 'fold-right fold-right) (cons 'reduce reduce)
        (cons 'apply apply)
        (cons 'assq assq) (cons 'assv assv) (cons 'assoc assoc)
        (cons 'memq memq) (cons 'memv memv) (cons 'member member)
        (cons 'error error)
        (cons 'vec vec) (cons 'mat mat) (cons 'ref ref)
        (cons 'dot dot) (cons 'outer outer) (cons 'matvec matvec) (cons 'matmul matmul)
        (cons 'transpose transpose) (cons 'trace trace)
        (cons 'eye eye) (cons 'zeros zeros) (cons 'ones ones)
        (cons 'vsum vsum) (cons 'norm norm) (cons 'inv inv) (cons 'solve solve)
        (cons 'det det) (cons 'logdet logdet) (cons 'cholesky cholesky)
        (cons 'rows rows) (cons 'cols cols) (cons 'size size)
        (cons 'vec->list vec->list) (cons 'list->vec list->vec)))

;;; ---------------------------------------------------------------------------------------
;;; Entry point

;; The value of PROGRAM (a list of top-level forms) with BINDINGS (name . value) for its
;; parameters and inputs.
(define (mc-run program bindings)
  ((mc-analyze-body program (cons '() (append bindings mc-primitives))) '()))
